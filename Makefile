# One command for the checks a change must pass before it lands.
.PHONY: lint quick test bench

# Static checks only: CI runs them beside the tests (see .ci/run).
lint:
	ruff check tacoma interpreters tests benchmarks examples
	mypy

# The tests that start no place: seconds, while you work.
quick:
	python -m pytest -q -x -n 0 tests/test_protocol.py tests/test_briefcase.py tests/test_exports.py tests/test_layout.py

test:
	python -m pytest

bench:
	python3 -m pytest benchmarks
	python3 benchmarks/report.py

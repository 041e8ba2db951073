# One command for the checks a change must pass before it lands.
.PHONY: lint test bench

lint:
	ruff check tacoma interpreters tests benchmarks examples
	mypy
	python -m pytest -q -x tests/test_protocol.py tests/test_briefcase.py tests/test_exports.py

test:
	python -m pytest

bench:
	python3 -m pytest benchmarks
	python3 benchmarks/report.py

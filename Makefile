# One command for the checks a change must pass before it lands.
.PHONY: lint quick test bench docs

# Static checks only: CI runs them beside the tests (see .ci/run).
lint:
	ruff check tacoma interpreters tests benchmarks examples docs/conf.py docs/_check_links.py
	mypy

# The tests that start no place: seconds, while you work.
quick:
	python -m pytest -q -x -n 0 tests/test_protocol.py tests/test_briefcase.py tests/test_exports.py tests/test_layout.py

test:
	python -m pytest

# The documentation site, in docs/_build/html (open index.html): every page read afresh
# (-E), warnings as errors (-W), every reference resolved (-n); then every link between the
# built pages, and its #fragment, checked (external links need a network, which CI lacks).
docs:
	@python -c "import sphinx, furo, myst_nb, sphinx_click" 2>/dev/null || { \
	  echo "make docs needs the docs extra: pip install -e '.[docs]'" >&2; exit 1; }
	python -m sphinx -E -W --keep-going -n -b html docs docs/_build/html
	python docs/_check_links.py docs/_build/html

bench:
	python3 -m pytest benchmarks
	python3 benchmarks/report.py

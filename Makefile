# The two commands of the README. Both install into .venv first (idempotent).
.PHONY: quickstart test lint setup docs

setup:
	scripts/setup.sh

quickstart: setup
	.venv/bin/flowerbed run scenarios/quickstart.yaml

# pytest exits 5 when it collects nothing; that is not a failure of the install.
test: setup
	.venv/bin/python -m pytest -q; status=$$?; [ $$status -eq 5 ] && exit 0; exit $$status

# Every shipped scenario run at the reduced settings of its '# test run:' header line
# (about 15 min on two cores); not part of `make test`, whose budget is 25 minutes.
.PHONY: test-scenarios
test-scenarios: setup
	FLOWERBED_SCENARIO_RUNS=1 .venv/bin/python -m pytest -q tests/test_scenarios_run.py

lint: setup
	.venv/bin/ruff check flowerbed tests benchmarks docs scripts
	.venv/bin/mypy flowerbed

# The documentation site: warnings are errors, then every internal link and anchor is checked.
# Open docs/_build/html/index.html; tests/test_docs.py runs the same build in CI.
docs: setup
	.venv/bin/python -m sphinx -W --keep-going -b html -q docs docs/_build/html
	.venv/bin/python scripts/check_doc_links.py docs/_build/html

# The Docker deployment built and run offline, checked against plain processes
# (docker/README.md). Exit 77: no Docker engine can be had on this machine.
.PHONY: docker-test
docker-test: setup
	scripts/docker-test.sh

# The two commands of the README. Both install into .venv first (idempotent).
.PHONY: quickstart test lint setup

setup:
	scripts/setup.sh

quickstart: setup
	.venv/bin/flowerbed run scenarios/quickstart.yaml

# pytest exits 5 when it collects nothing; that is not a failure of the install.
test: setup
	.venv/bin/python -m pytest -q; status=$$?; [ $$status -eq 5 ] && exit 0; exit $$status

lint: setup
	.venv/bin/ruff check flowerbed tests benchmarks
	.venv/bin/mypy flowerbed

# The Docker deployment built and run offline, checked against plain processes
# (docker/README.md). Exit 77: no Docker engine can be had on this machine.
.PHONY: docker-test
docker-test: setup
	scripts/docker-test.sh

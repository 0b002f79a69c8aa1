# relperception: the two commands of the README.
#   make demo   sets up .venv (if needed) and runs the main job on a synthetic recording
#   make test   sets up .venv (if needed), then colcon build + colcon test (pytest, ament linters)
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.relperception-installed
DEMO_OUTPUT ?= demo_output

.PHONY: venv demo test pytest lint bench clean

venv: $(STAMP)

$(STAMP): setup.py requirements/ros-jazzy.txt requirements/dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r requirements/dev.txt -r requirements/ros-jazzy.txt
	$(BIN)/pip install --quiet -e .
	touch $(STAMP)

demo: venv
	$(BIN)/relperception demo --output $(DEMO_OUTPUT)

test: venv
	bash scripts/test.sh

pytest: venv
	$(BIN)/python -m pytest -q test

lint: venv
	$(BIN)/ruff check relperception test bench

bench: venv
	$(BIN)/python bench/vo_bench.py --output bench_output

clean:
	rm -rf build install log $(DEMO_OUTPUT) bench_output .pytest_cache

# Two entry points: `make demo` (the main job) and `make test` (the suite).
# Both create .venv with the project installed; nothing else is needed but Python >= 3.11 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	rm -rf runs/demo
	$(BIN)/amaris init runs/demo --config examples/amaris.toml
	$(BIN)/amaris loop examples/math --run runs/demo --judge auto

test: $(STAMP)
	$(BIN)/ruff check amaris_cli tests examples bench
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) runs/demo

# Two entry points: `make demo` (the main job) and `make test` (the suite).
# Both create .venv with the project installed; nothing else is needed but Python >= 3.11 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The suite mostly waits (on the sim-judge's latencies and on the processes it starts): more workers than
# cores keeps both cores busy. `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 4

.PHONY: demo test lint bench clean bytecode

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# The package's bytecode, written before the commands run: pip writes it for an installed package but not for
# an editable one, and with PYTHONDONTWRITEBYTECODE set (as on the project's machines) Python never writes it,
# so every `amaris` process compiled the package from source (0.2-0.3 s of CPU each; the suite starts ~200).
# compileall rewrites only what changed.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q amaris_cli tests

demo: $(STAMP) bytecode
	rm -rf runs/demo
	$(BIN)/amaris init runs/demo --config examples/amaris.toml
	$(BIN)/amaris loop examples/math --run runs/demo --judge auto
	$(BIN)/amaris report runs/demo
	@echo ""
	@echo "Memory on against off (examples/recurring: one hack in 16 rollouts at every step, too rare for one step):"
	rm -rf runs/demo-memory runs/demo-no-memory
	$(BIN)/amaris init runs/demo-memory --config examples/amaris.toml --total-steps 8
	$(BIN)/amaris loop examples/recurring --run runs/demo-memory --judge auto --quiet
	$(BIN)/amaris replay runs/demo-memory --out runs/demo-no-memory --no-static --no-dynamic --judge auto --quiet
	$(BIN)/amaris compare runs/demo-memory runs/demo-no-memory
	@echo "With the sim-judge, the updater with memory saw the hack recur and added pitfalls against it (their reasons"
	@echo "cite the memory entries: $(BIN)/amaris inspect runs/demo-memory --step 2); without memory it never did."
	@echo "A real judge decides for itself: the table above shows what it did."
	@echo ""
	@echo "The rollouts are fixed example files (examples/math), one per step, each with its own mix of correct,"
	@echo "wrong and hacked answers: no model is trained. A step's mean reward moves with that mix and with the"
	@echo "rubric, which gets stricter as it penalizes the hacks the analyzer found (see inspect runs/demo)."
	@echo ""
	@echo "amaris is installed in $(VENV): run $(BIN)/amaris, or 'source $(BIN)/activate' first, then amaris."
	@echo "Next:"
	@echo "  $(BIN)/amaris inspect runs/demo           per step: rubric, reward, update, hacking; tokens"
	@echo "  $(BIN)/amaris inspect runs/demo --step 2  one step: criteria, update rationale, memory hits"
	@echo "  $(BIN)/amaris report runs/demo            write the HTML report again"
	@echo "The report (written above): file://$(CURDIR)/runs/demo/report.html"
	@echo "  open it in a browser and click a step, rollout, rubric version or update to see what is behind it"

# pytest caches its rewritten test modules only where Python may write bytecode: with PYTHONDONTWRITEBYTECODE
# set, each worker rewrote every test module at collection (4 s of CPU against 2 s).
test: $(STAMP) bytecode
	$(BIN)/ruff check amaris_cli tests examples bench
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) runs/demo runs/demo-memory runs/demo-no-memory

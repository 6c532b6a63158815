# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DSTAMP := $(VENV)/.demo-installed
BSTAMP := $(VENV)/.bench-installed

.PHONY: test demo install bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# the test run: mrec with its test oracles and the MD integrations (MDAnalysis, ASE, OpenMM, MDTraj,
# MDAnalysisTests' files)
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q -e '.[test,remote,dask,md,openmm,mdtraj]'
	touch $(STAMP)

# the demo needs mrec alone (numpy, zstandard, crc32c, numcodecs): no test oracles
$(DSTAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q -e .
	touch $(DSTAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

demo: $(DSTAMP)
	$(PY) -m mrec demo $(DEMO_OUT)

$(BSTAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test,bench]'
	touch $(BSTAMP)

# the issue-7 suite scaled down (about a minute); drop --quick for the full workloads
bench: $(BSTAMP)
	$(PY) tools/bench_core.py
	$(PY) tools/bench_traj.py
	$(PY) -m tools.bench --quick all

clean:
	rm -rf $(VENV) build *.egg-info

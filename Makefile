# Two commands that work on a fresh clone (Python 3.11+, no GPU needed):
#   make book   set up .venv, execute every chapter and build the HTML book in _build/html
#   make test   the same setup, then every check CI runs (lint, freshness, book, PDF, unit, homework, Colab, pages)
#   make pdf    make book, then print it as one PDF, _build/pdf/book.pdf (headless Chromium), and check it
# Other targets: make unit (fast developer loop, < 1 min), make lint, make sync (regenerate reader and homework
# notebooks), make check-sync, make chromium (install headless Chromium), make bubblewrap (install the grader's
# sandbox), make clean.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
HTML   := _build/html
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider
export PYTHONHASHSEED := 0
# Never hand a plotting backend to the notebook kernels: ipykernel then uses the inline backend and every
# `plt.show()` becomes a figure on the page. (With MPLBACKEND=Agg inherited, the book had no figures.) Scripts
# and tests choose Agg themselves (tests/conftest.py, benchmarks/).
unexport MPLBACKEND

# $(call timed,stage,command): echo and run command, then print the stage's wall time (keeping the exit status).
timed = @t0=$$(date +%s); echo '$(2)'; $(2); rc=$$?; echo "[stage $(1): $$(( $$(date +%s) - t0 )) s]"; exit $$rc

.PHONY: setup book pdf test test-book test-pytest lint sync check-sync unit homework colab rendered chromium bubblewrap clean constraints

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[book,test]"
	@touch $@

setup: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo "The book is at $(CURDIR)/$(HTML)/index.html"

# The PDF edition, printed from the notebooks `make book` executed (tools/pdf.py: nothing runs twice), then checked:
# its page count, every figure of the chapters in it, no TeX left unrendered, every chapter's title.
pdf: book chromium
	$(BIN)/python tools/pdf.py build
	$(BIN)/python tools/pdf.py check

# ruff's lint rules and its formatter (the same two hooks as .pre-commit-config.yaml).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

sync: $(STAMP)
	$(BIN)/python tools/notebooks.py sync

check-sync: $(STAMP)
	$(BIN)/python tools/notebooks.py check

# The developer loop: every test not marked slow (no notebook execution, no Chromium, no fresh venv).
unit: $(STAMP)
	$(PYTEST) -q -m "not slow" tests

# The slow stages on their own (make test runs them all in one session).
homework: $(STAMP)
	$(PYTEST) -q --nbval-lax --nbval-current-env book/homework/*.ipynb

colab: $(STAMP)
	$(PYTEST) -q tests/test_colab.py

rendered: $(STAMP)
	BOOK_HTML=$(CURDIR)/$(HTML) $(PYTEST) -q tests/test_rendered.py

chromium:
	@bash tools/ensure-chromium.sh

bubblewrap:
	@bash tools/ensure-bubblewrap.sh

# Everything, in order of cost: lint, freshness of generated notebooks, then two things at once, one on each core:
# the book build (which executes every chapter with its hidden asserts and fails on any error) followed by the PDF,
# and one pytest session on two workers: the unit tests, the slow tests (training, the Colab simulation) and nbval
# on every homework notebook (the second execution of every chapter's code, on the second floating-point path:
# tests/perturbed.py). The build executes one chapter at a time (Sphinx cannot read in parallel here: README), so
# alone it leaves a core idle for ten minutes; side by side the two keep both busy. When both have ended, the
# checks of the built pages (tests/test_rendered.py in headless Chromium, tests/test_downloads.py) run.
# The workers (pytest-xdist, --dist loadscope) take units of work longest first, as tests/conftest.py orders
# them: a test module or a homework notebook (nbval's cells share one kernel), or test modules that read
# one class graded once per session (tests/conftest.py's SHARED_UNITS).
# The first stage makes sure headless Chromium is there for the rendered-page checks (tools/ensure-chromium.sh:
# nothing to do where it is present; installs Debian's package where it can; otherwise stops at once and says
# what to run), so that a machine without it fails in seconds, not after twenty minutes; the second, the same for
# bubblewrap, the sandbox the grader runs each answer in (tools/ensure-bubblewrap.sh; tests/test_grade_walls.py).
# Each stage prints its wall time (the two side-by-side stages print their output when they end); pytest lists
# its slowest tests and writes per-test times to _build/pytest.xml and _build/pytest-pages.xml.
PAGE_TESTS := tests/test_rendered.py tests/test_downloads.py

test: $(STAMP)
	$(call timed,chromium,bash tools/ensure-chromium.sh)
	$(call timed,bubblewrap,bash tools/ensure-bubblewrap.sh)
	$(call timed,lint,$(BIN)/ruff check .)
	$(call timed,format,$(BIN)/ruff format --check .)
	$(call timed,sync-check,$(BIN)/python tools/notebooks.py check)
	$(call timed,book and pytest side by side,$(MAKE) --no-print-directory -j2 --output-sync=target test-book test-pytest)
	$(call timed,pages,BOOK_HTML=$(CURDIR)/$(HTML) $(PYTEST) -n 2 $(PAGE_TESTS) --durations=10 \
		--junitxml=_build/pytest-pages.xml)

# The two halves of `make test` that run side by side (not meant to be called alone: use book, pdf, unit, ...).
test-book: $(STAMP)
	$(call timed,build,$(BIN)/jupyter-book build . -W -n --keep-going)
	$(call timed,pdf,$(BIN)/python tools/pdf.py build && $(BIN)/python tools/pdf.py check)

test-pytest: $(STAMP)
	$(call timed,pytest,$(PYTEST) -n 2 --dist loadscope --no-loadscope-reorder tests \
		$(addprefix --ignore=,$(PAGE_TESTS)) --nbval-lax --nbval-current-env book/homework/*.ipynb \
		--durations=40 --junitxml=_build/pytest.xml)

constraints: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^one-hot-to-transformers' | sed 's/+cpu$$//' > constraints.txt

clean:
	rm -rf _build .pytest_cache

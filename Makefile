# Two commands that work on a fresh clone (Python 3.10+, no GPU needed):
#   make book   set up .venv, execute every chapter and build the HTML book in _build/html
#   make test   the same setup, then every check CI runs (lint, unit tests, notebooks, book, rendered pages)
# Other targets: make sync (regenerate paired and homework notebooks), make clean.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
HTML   := _build/html
export PYTHONHASHSEED := 0
export MPLBACKEND := Agg

.PHONY: setup book test lint sync check-sync unit rendered chromium clean constraints

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[book,test]"
	@touch $@

setup: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo "The book is at $(CURDIR)/$(HTML)/index.html"

lint: $(STAMP)
	$(BIN)/ruff check .

sync: $(STAMP)
	$(BIN)/python tools/notebooks.py sync

check-sync: $(STAMP)
	$(BIN)/python tools/notebooks.py check

chromium:
	@bash tools/ensure-chromium.sh

# Everything, in order of cost: lint, freshness of generated notebooks, the book build (which executes every
# chapter), then one pytest session: unit tests, the Colab simulation, nbval on every chapter and homework
# notebook, and the rendered-page checks on the built HTML in headless Chromium.
test: $(STAMP) chromium
	$(BIN)/ruff check .
	$(BIN)/python tools/notebooks.py check
	$(BIN)/jupyter-book build . -W -n --keep-going
	BOOK_HTML=$(CURDIR)/$(HTML) $(BIN)/python -m pytest -p no:cacheprovider tests \
		--nbval-lax --nbval-current-env book/[0-9]*.ipynb book/homework/*.ipynb

constraints: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^companion' | sed 's/+cpu$$//' > constraints.txt

clean:
	rm -rf _build .pytest_cache

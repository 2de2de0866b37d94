# The grader in a container, for submissions you do not trust (see README, "Grading homework").
#
#   podman build -f tools/grader.Dockerfile -t companion-grader .
#   podman run --rm --network=none --read-only --tmpfs /tmp --cap-drop=ALL --security-opt=no-new-privileges \
#       --pids-limit=512 --memory=8g --cpus=2 \
#       -v "$PWD/submissions:/submissions:ro" -v "$PWD/results:/results" \
#       companion-grader /submissions --out /results --jobs 2
#
# The image holds the package with the `grade` extra (CPU-only torch, pinned by constraints.txt) and the book's
# homework notebooks and chapters (the exercises, and the published solutions the grader flags). Nothing in it
# needs the network at run time; the submissions are mounted read-only and only /results is writable.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 OMP_NUM_THREADS=1 MPLBACKEND=Agg

RUN useradd --create-home --uid 1000 grader
WORKDIR /opt/companion

COPY pyproject.toml constraints.txt README.md ./
COPY companion ./companion
COPY homework_grader ./homework_grader
COPY book ./book

RUN pip install --extra-index-url https://download.pytorch.org/whl/cpu -c constraints.txt -e ".[grade]"

USER grader
ENTRYPOINT ["companion-grade"]

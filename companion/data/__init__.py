"""Data and tasks (machinery): the offline corpora and evaluation sets of chapter 3 (:mod:`companion.data.corpus`),
the dates task of chapter 5 (:mod:`companion.data.date_task`), the Python documentation snapshot of chapter 6
(:mod:`companion.data.python_docs`), BERT's pretraining data and the task metrics of chapter 7
(:mod:`companion.data.bert_pretraining`, :mod:`companion.data.metrics`) and the associative-recall task of
chapters 8-9 (:mod:`companion.data.recall_task`). A task may import concepts; no concept imports a task.
The models trained on these tasks and their training runs (the recipes) are in :mod:`companion.training`."""

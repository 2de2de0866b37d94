"""The companion package of the book *From one-hot vectors to Transformers*.

**Concepts**: one module per idea the book names, in the order of the chapters.

- chapter 1: :mod:`companion.text` (tokens, and the one :class:`~companion.text.Vocabulary` type with its
  special tokens), :mod:`companion.embeddings` (one-hot vectors, the embedding table, similarities);
- chapter 2: :mod:`companion.embedding_lm` (the word-embedding language model and the bigram optimum);
- chapter 3: :mod:`companion.word2vec`, :mod:`companion.glove`, :mod:`companion.evaluation` (similarity and
  analogies, equal to gensim's);
- chapter 4: :mod:`companion.masks`, :mod:`companion.attention` (weightless, loop, matrix and blocked attention,
  multi-head attention with a swappable attention function, the key/value cache);
- chapter 5: :mod:`companion.positional` (sinusoidal, learned, rotary), :mod:`companion.transformer` (layer norm,
  feed-forward, the residual sublayer, encoder, causal and decoder blocks, the encoder–decoder model),
  :mod:`companion.decoding` (the one generation loop and the one sampler, every model's; greedy here);
- chapter 6: :mod:`companion.bpe` (GPT-2's byte-level BPE), :mod:`companion.gpt` (the decoder-only model, GPT-2
  one configuration of it, chapters 8–10's another; its parameter count, generation with or without the
  key/value cache), :mod:`companion.decoding` (temperature, top-k and top-p sampling), :mod:`companion.induction`
  (an induction head forming in a two-layer attention-only model);
- chapter 7 (BERT): :mod:`companion.wordpiece` (BERT's tokeniser), :mod:`companion.bert` (BERT's input format,
  encoder and pretraining heads, the parameter count, sentence embeddings, SQuAD's span head and span decoding);
- chapter 8: :mod:`companion.linear_attention` (feature maps, the four equal forms, the state, rank),
  :mod:`companion.recall_capacity` (what a state of r features can recall: the bound, built by hand);
- chapter 9: :mod:`companion.banded_attention` (the near field), :mod:`companion.fmmformer` (near plus low-rank
  far field), :mod:`companion.nbody` (the n-body analogue);
- chapter 10: :mod:`companion.kernels` (shift-invariant kernels and the frequencies Bochner's theorem pairs
  with them), :mod:`companion.random_features` (random maps whose dot products approximate a kernel).

**Machinery**: what the chapters use without teaching it, in sub-packages. A concept module never imports one
(``tests/test_architecture.py`` holds the rule); machinery may import concepts.

- :mod:`companion.data`, data and tasks: :mod:`companion.data.corpus` (offline corpora and evaluation sets,
  chapter 3), :mod:`companion.data.date_task` (the dates task, chapter 5), :mod:`companion.data.python_docs`
  (the Python documentation snapshot, chapter 6), :mod:`companion.data.bert_pretraining` (BERT's masked-LM and
  next-sentence data, chapter 7), :mod:`companion.data.metrics` (SQuAD, SNLI and GLUE metrics, chapter 7),
  :mod:`companion.data.span_task` (the generated span task, chapter 7), :mod:`companion.data.recall_task`
  (associative recall, chapters 8-10);
- :mod:`companion.training`, training recipes: :mod:`companion.training.word2vec` (the fast word2vec trainer,
  chapter 3), the training loop and schedules (chapter 5),
  :mod:`companion.training.date_recipe` (the dates encoder-decoder and its training, chapter 5),
  :mod:`companion.training.gpt_pretraining` (GPT's pretraining on Python's documentation, the shipped
  checkpoint, chapter 6) and :mod:`companion.training.recall_recipe` (training on recall, chapters 8-10);
- :mod:`companion.interop`, PyTorch's layers and masks ↔ the companion's, with :mod:`companion.interop.hf_gpt`
  (Hugging Face's GPT-2 weights → the companion's GPT, chapter 6) and :mod:`companion.interop.hf_bert` (Hugging
  Face's BERT weights and model folders ↔ the companion's BERT, chapter 7);
- :mod:`companion.benchmarking`, time and memory of attention (chapters 4, 8-10), with
  :mod:`companion.benchmarking.linear_attention` (chapter 8) and :mod:`companion.benchmarking.nbody` (chapter 9);
- figures, in :mod:`companion.plotting` (shared ones) and its modules :mod:`companion.plotting.word_vectors`
  (chapters 2-3), :mod:`companion.plotting.attention` (chapters 4-5, and the cost figure of chapters 8-10) and
  :mod:`companion.plotting.diagrams` (chapters 4-5), :mod:`companion.plotting.fmmformer` (chapter 9),
  :mod:`companion.plotting.random_features` (chapter 10);
- homework: :mod:`companion.exercises` (one checker per exercise, one module per chapter, built on
  :mod:`companion.exercises.checking`). The instructors' grader is a package of its own, ``homework_grader``
  (``companion-grade``, or ``python -m homework_grader``), shipped beside this one; nothing here imports it.
"""

__version__ = "0.1.0"

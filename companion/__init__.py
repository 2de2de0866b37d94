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
  feed-forward, the residual sublayer, encoder, causal and decoder blocks, the encoder–decoder and decoder-only
  models), :mod:`companion.training` (the training loop);
- chapter 6: :mod:`companion.bpe` (GPT-2's byte-level BPE), :mod:`companion.gpt` (GPT-2: the model, its parameter
  count, sampling), :mod:`companion.pretraining` (pretraining on Python's documentation, the shipped checkpoint),
  :mod:`companion.induction` (an induction head forming in a two-layer attention-only model);
- chapter 7 (BERT): :mod:`companion.wordpiece` (BERT's tokeniser), :mod:`companion.bert` (BERT's encoder and
  pretraining heads, the parameter count, sentence embeddings);
- chapter 8: :mod:`companion.linear_attention` (feature maps, the four equal forms, rank, generation cost);
- chapter 9: :mod:`companion.banded_attention` (the near field), :mod:`companion.fmmformer` (near plus low-rank
  far field), :mod:`companion.nbody` (the n-body analogue);
- chapter 10: :mod:`companion.random_features` (random maps whose dot products approximate a kernel).

**Machinery**: what the chapters use without teaching it.

- data and tasks: :mod:`companion.data.corpus` (offline corpora and evaluation sets, chapter 3),
  :mod:`companion.data.date_task` (the dates task, chapter 5), :mod:`companion.pretraining_data` (BERT's masked-LM
  and next-sentence inputs, chapter 7), :mod:`companion.recall_task` (associative recall, chapter 8),
  :mod:`companion.metrics` (SQuAD, SNLI and GLUE metrics, chapter 7);
- figures, in :mod:`companion.plotting` (shared ones) and its modules :mod:`companion.plotting.embeddings`
  (chapters 2-3), :mod:`companion.plotting.attention` and :mod:`companion.plotting.diagrams` (chapters 4-5),
  :mod:`companion.plotting.linear_attention` (chapter 8), :mod:`companion.plotting.fmmformer` (chapter 9),
  :mod:`companion.plotting.random_features` (chapter 10);
- :mod:`companion.interop` (PyTorch's layers and masks ↔ the companion's), :mod:`companion.interop_hf` (Hugging
  Face's GPT-2 weights → the companion's GPT, chapter 6), :mod:`companion.interop_bert` (Hugging Face's BERT
  weights and model folders ↔ the companion's BERT), :mod:`companion.benchmarking` (time
  and memory of attention, chapters 4 and 8);
- homework: :mod:`companion.checking` (the checker machinery), :mod:`companion.exercises` (one checker per
  exercise, one module per chapter) and :mod:`companion.grade` (grades a folder of submitted notebooks).
"""

__version__ = "0.1.0"

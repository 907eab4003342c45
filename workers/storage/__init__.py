"""Where the pipeline's data lives: ``catalog`` (collections' settings), ``states`` (each
document's state), ``bodies`` (document text until indexed), ``checkpoints`` (chunks and paid
contexts), ``chunk_index`` (the OpenSearch index: mapping, writes, deletes)."""

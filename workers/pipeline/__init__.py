"""The Celery pipeline: the app (``app``), which queue a document goes to and in which order
(``routing``), and one task per stage (``tasks``: chunk, contextualize, index)."""

"""situate's pipeline: everything that runs inside a Celery worker, and the pieces producers share.

One concept per module: ``settings`` (environment), ``collections`` (per-collection config),
``documents`` (validation, versions, routing), ``bodies`` (where document text waits),
``status`` (per-document state), ``chunking``, ``contextualizers``, ``embedders``,
``index`` (mapping and writes), ``search`` (hybrid read path), ``app`` (Celery) and ``tasks``.
"""

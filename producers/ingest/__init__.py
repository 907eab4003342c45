"""Documents in: ``loaders`` (files, folders, JSONL, the cookbook's JSON), ``s3`` (object
storage), ``sync`` (``--sync``: what left the source leaves the collection), ``submit`` (store
the body, queue the document, wait for it), ``estimate`` (the bill before the run, by the
workers' own planner). Validation itself is ``workers.documents.validation``'s.
"""

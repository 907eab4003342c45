"""Documents as users have them — PDF, HTML, Office files, CSV — turned into text with structure.

``detect`` tells a format by its content (and its name); ``sandbox`` runs an extractor in a child
process under limits (time, memory), because parsing an untrusted file is an attack surface;
each format has its extractor (``pdf``, ``html``, ``office``, ``tables``), all producing one
``document.Extracted``: Markdown-ish text, page offsets, headings, a profile (``profile``: who,
what, when). ``cleanup`` removes running headers and footers; ``headings`` finds section titles
in text that has no markup (a PDF's).
"""

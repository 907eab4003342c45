"""The ``situate`` command line: ``main`` lists every command; each module holds a few."""

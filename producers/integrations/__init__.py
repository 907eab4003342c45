"""situate as a retriever of the frameworks agents are built with, on the HTTP API through our
client: ``langchain`` (``pip install 'situate[langchain]'``) and ``llamaindex``
(``'situate[llamaindex]'``). Each turns the API's hits into the framework's documents with the
citation in their metadata (``citations``), sync and async."""

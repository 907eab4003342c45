"""Stand-ins for the remote model APIs, spoken to by the real SDKs: ``claude`` (Anthropic
Messages and Bedrock Converse, with ``cache``'s prompt-cache rules and ``batches``' Message
Batches; ``vectors``: Voyage, Bedrock and Cohere embeddings and rerank) and ``openai_fleet``
(OpenAI-compatible replicas, each with its own prefix cache)."""

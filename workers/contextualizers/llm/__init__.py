"""Language models behind an API: Claude through the Anthropic API or Bedrock (``providers``), and
servers of your own behind the OpenAI protocol (``openai_compatible``, each document's calls on one
replica: ``replicas``); ``scheduler`` (warm first, then fan out: what makes prompt caching pay),
``callpool`` (calls in flight per process), ``ratelimit`` (one limiter in Redis for every worker),
``usage`` (the bill), ``batches`` (Message Batches mode)."""

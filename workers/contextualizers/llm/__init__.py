"""Claude through the Anthropic API or Bedrock: ``providers`` (the two wire protocols),
``scheduler`` (warm first, then fan out: what makes prompt caching pay), ``callpool`` (calls in
flight per process), ``ratelimit`` (one limiter in Redis for every worker), ``usage`` (the
bill), ``batches`` (Message Batches mode)."""

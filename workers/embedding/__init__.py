"""Embedders: ``registry`` (by name, one instance per process), ``local`` (ONNX / C models
shipped in packages), ``remote`` (Voyage, Bedrock), ``base`` (the interface)."""

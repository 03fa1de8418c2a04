"""The HTTP dialects' translation (OpenAI, Ollama): no Tornado, no Engine."""

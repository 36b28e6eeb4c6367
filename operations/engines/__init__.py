"""Engines (SGLang, vLLM): flag catalogues, validation, GB10 profiles and rules."""

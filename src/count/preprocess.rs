//! SGLang 0.5.23's chat preprocessing (`serving_chat.py`), mirrored step by step.

"""The model runtime: one MNN model, its generation loop and what it needs."""

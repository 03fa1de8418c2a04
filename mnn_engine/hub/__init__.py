"""Getting models: the catalog, the sources (Hugging Face, ModelScope, manifests),
resumable verified downloads, and pulls into the store."""

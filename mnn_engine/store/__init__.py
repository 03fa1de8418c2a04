"""The model store on disk, and pulls into it."""

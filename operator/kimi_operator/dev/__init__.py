"""Development helpers: vLLM's CPU build serving a tiny model on this machine (`make serve-cpu`)."""

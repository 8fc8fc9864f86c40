"""The weights cache's downloader: `python -m kimi_kernels.weights` (docs/weights.md).

It runs in the download Job of a Hugging Face source, in the serving image (which already carries
`huggingface_hub` and `hf_xet` at the versions vLLM pins), and needs nothing of the operator's
stack. It fetches one commit of a repository into a directory (the cache's claim): parallel across
files, resumable after a kill, every file verified against the hub's size and hash, and a manifest
written last, so that a directory without one is never served.
"""

from kimi_kernels.weights.layout import MANIFEST, Manifest, read_manifest

__all__ = ["MANIFEST", "Manifest", "read_manifest"]

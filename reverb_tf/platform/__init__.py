"""Module paths dm-reverb code imports (`reverb.platform.checkpointers_lib`)."""

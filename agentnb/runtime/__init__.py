"""The runtime: scheduler loop thread, turn/run/step engine, models and tools."""

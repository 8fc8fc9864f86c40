"""The one place that talks to the API server: client, apply, watches, events."""

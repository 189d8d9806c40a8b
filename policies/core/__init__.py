"""The harness's pure core for context assembly and permissions: no Django, Celery or Channels."""

"""The run's pure core: state machines and rules, free of Django, Celery and Channels."""

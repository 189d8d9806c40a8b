"""The approvals' pure core: free of Django, Celery and Channels."""

"""Sample: print the service's health."""

import json

print(json.dumps({"status": "ok"}))

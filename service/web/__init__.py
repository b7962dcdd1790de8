"""What the HTTP entry points (api, console) share: bearer keys and roles, the one problem+json error shape,
rate limits and CSV responses."""

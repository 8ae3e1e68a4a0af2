"""The operations console: HTML pages over the same operation functions as the REST API and the commands."""

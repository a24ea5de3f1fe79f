"""The mechanism: vaccination, interception, resume, surgery validation, trials."""

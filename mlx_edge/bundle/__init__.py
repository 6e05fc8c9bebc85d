"""The export bundle: its format and safe paths (`layout`), the checks of its models (`verify`), of a
Unigram tokenizer spec (`tokenizer_spec`) and of what the app trusts in the manifest (`trust`).
Export and check build on it."""

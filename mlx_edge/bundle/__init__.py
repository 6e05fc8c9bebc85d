"""The export bundle: its format (`layout`) and the checks of its models (`verify`). Export and check build on it."""

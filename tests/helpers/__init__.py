"""Plain helpers shared by the tests: tiny models and data (`tiny`), CLI assertions (`cli`), cached
exports (`exports`). Fixtures stay in conftest.py; test files import from here, never from each other."""

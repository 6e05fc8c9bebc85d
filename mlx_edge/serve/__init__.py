"""`mlx-edge serve`: a local training service with web pages: login, jobs, live progress and curves, artifacts.

app.py (Starlette app, guards, uvicorn), pages.py (pages and API), auth.py (users, sessions, CSRF, rate
limits), db.py (SQLite), uploads.py, forms.py, jobs.py (the queue), worker.py (one job in its own process),
reporter.py (progress into the database). Templates and the CSS/JS ship in this package: nothing from a CDN.
"""

# Upload limits, here so that the CLI reads its defaults without importing the service.
DEFAULT_LIMIT_MB = 50  # per data file
DEFAULT_QUOTA_MB = 500  # all of one user's uploads

"""Widget tests use the shared ``make_runtime`` and ``store_url`` fixtures of tests/conftest.py."""

# The browser test's notebook is opened in JupyterLab by test_browser.py; nbval must not run
# it on its own (it would leave a chat.sqlite beside it).
collect_ignore_glob = ["browser/*.ipynb"]

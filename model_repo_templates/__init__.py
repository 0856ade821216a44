"""The Jinja templates of the Triton model repository (read by pipeline.render, never imported as code).

This file makes the folder a package so that it installs as `pipeline.model_repo_templates` (the
mapping is in pyproject.toml) and render finds it with importlib.resources, from a wheel or a checkout.
"""

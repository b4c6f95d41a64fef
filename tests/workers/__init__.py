"""Tests of the crawl scheduler, the in-process launcher and the crawl/serve commands."""

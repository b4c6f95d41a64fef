"""The catalog: what every crawl and verification writes and every API call reads.

Files, one job each:

* `models.py`: typed SQLAlchemy 2 models (`types.py`: shared column types, naming convention).
* `db.py`: `Database`: engine, session factory and read path from the settings (SQLite: WAL,
  foreign keys, busy timeout).
* `readpath.py` (+ `shapes.py`, `sqlite_reads.py`, `pg_reads.py`): the API's read-only
  sessions: SELECTs compiled once and run on the driver, one snapshot per request.
* `caches.py`, `memo.py`: what reads keep between requests, owned by the `Database`.
* `migrate.py`: alembic from code (`registry db ...`, first use of `registry index`, tests);
  the scripts live in the top-level `migrations/` folder.
* `snapshot.py` + `services.py`: the one writer, `upsert_repo_snapshot(session, RepoSnapshot)`.
* `search/` (+ `search_index.py`, the free-text index per dialect): search, its pure planner
  and statements, cursors; `facets.py`: facet counts; `stats.py`: the catalog's counts.
* `folding.py`: the one ASCII-case spelling search stores and matches architectures,
  licenses, file types and size labels in.
* `amounts.py`: parameter counts and byte sizes of the filters as people write them (`7B`,
  `6GiB`), one reading for the command line and the API.
* `lineage.py`: edges from card, tags and GGUF keys; ancestor and descendant walks.
* `errors.py`: `CatalogError` subclasses with a code and an HTTP status.

Decisions worth knowing:

* A repo is keyed by its id string (`org/name`). Local folders are pseudo-repos with
  `source = 'local'` and the id `local/<folder name>` (a second folder of the same name gets
  `local/<name>-<hash>`); Hugging Face and LM Studio cache layouts keep their real id.
* An artifact is keyed by (repo, path of its single file or first shard). A new revision
  rewrites the listed artifacts and marks the others `gone`; the same revision writes nothing.
* `artifacts` doubles as the search row: it carries copies of the searched facts and repo
  counters, so every filter and sort is single-table with a `(key, id)` index. Its
  architecture, license, file type and size label are folded (`folding.py`), so that those
  filters ignore ASCII case; `facts` keeps the file's own spelling.
* Enums are strings with check constraints. Timestamps are UTC-aware on both databases.
"""

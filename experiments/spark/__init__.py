"""The Spark data pipeline: PySpark distributes the work, the Bobox scheduler runs each
executor's part of it.

    from experiments.spark.session import spark_session
    from experiments.spark.datagen import spark_datagen
    from experiments.spark.run import spark_run
    from experiments.spark.report import spark_report

    spark = spark_session("local[*]")                       # or "spark://host:7077"
    data = spark_datagen(0.1, "data/tpch-sf0.1-spark")      # stage 1: partitioned Parquet
    tables = spark_run(["q1", "q3"], data, output="out")    # stage 2: out/q1.parquet, ...
    spark_report(["results-host1", "results-host2"], "report")  # stage 3: summary.csv, report.md

One concept per module, lowest first (a module imports only those above it in this list):

* ``messages``: progress lines, and executor failures tagged for the driver's one-line
  errors;
* ``session``: master URLs, the SparkSession (the workers run the driver's interpreter),
  the cluster's shape;
* ``layout``: the partitioned folder's names and manifest, and reading what a folder
  holds;
* ``split``: the split by order key, row-group surgery on Parquet files (no Spark);
* ``executor``: the long-lived Scheduler of each executor's Python worker;
* ``faults``: injected failures and the trace of task attempts;
* ``datagen``: stage 1, TPC-H generated and placed by order key;
* ``views``: stage 2's input, any TPC-H folder as partition views (cut on the fly and
  cached where needed);
* ``run``: stage 2, the queries fanned out to the executors, partials shuffled and
  combined;
* ``report``: stage 3, experiment CSVs of many runs summarized;
* ``bench``: the Spark path's overhead against ``bobox run``'s;
* ``regions``: a parallel region's channels as Spark partitions (seed 001).

The command line is ``experiments/cli/spark.py`` (``bobox spark ...``). Nothing is
re-exported here: import from the module that holds a name.
"""

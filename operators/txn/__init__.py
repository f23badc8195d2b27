"""The TStream benchmark's applications (GS, SL, OB, TP) on ``bobox_sched.txn``:
generators (``workload``), operators and state (``apps``), plans and runs (``plan``)."""

from operators.txn.apps import APPS, App, Bidding, GrepSum, Ledger, TollProcessing, make_app
from operators.txn.plan import TxnSink, build_plan, oracle_of, pat_seq_of, run_once, run_parser_alone, same_outputs

__all__ = ["APPS", "App", "Bidding", "GrepSum", "Ledger", "TollProcessing", "TxnSink", "build_plan", "make_app",
           "oracle_of", "pat_seq_of", "run_once", "run_parser_alone", "same_outputs"]

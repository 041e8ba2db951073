"""The published figures the suite reports beside ours, copied from the papers, labelled.

Dikaiakos, Kyriakou and Samaras, "A performance analysis framework for mobile-agent
systems" (seed 002): Table 8, "Synopsis of experimental measurements", peak and sustained
rates of Concordia 1.1.4, Aglets 1.0.3 and Voyager 3.1 on Pentium III 500 MHz PCs, Windows
NT 4.0, JRE 1.1.7, 100 Mbps Ethernet. The paper reports no rate for PROXY.

Johansen, Sudmann and van Renesse, "Performance issues in TACOMA" (seed 000): Table 1, the
13 steps of a TACOMA v1.3 meet, 21,675 µs in all.

These numbers are never measured here and never mixed with ours: they appear only in their
own columns, under the systems' names. Table 8's FORW-MSG rates are those of the paper's
12-client configuration (section 4.3: Concordia's capacity "drops by almost 23%" from 12.48
requests/s with 3 clients, Aglets' by 9.5% from 37.33, Voyager's is "almost four times
higher" than its 12.91): they stand beside our FORW-MSG-12. For 3 clients the text gives
only those sustained rates (no peaks); for 6 clients, none.
"""

from __future__ import annotations

import math

__all__ = ["SYSTEMS", "TABLE_8", "TABLE_8_SETUP", "TACOMA_MEET_US", "UNITS", "VERSIONS"]

SYSTEMS = ("Concordia", "Aglets", "Voyager")
#: The versions Table 8 measured, and where.
VERSIONS = {"Concordia": "1.1.4", "Aglets": "1.0.3", "Voyager": "3.1"}
TABLE_8_SETUP = "Pentium III 500 MHz, Windows NT 4.0, JRE 1.1.7, 100 Mbps Ethernet"

#: Table 8: benchmark -> system -> (peak, sustained), in the benchmark's unit; nan where
#: the paper gives no figure.
TABLE_8: dict[str, dict[str, tuple[float, float]]] = {
    "CL": {"Concordia": (3125, 3000), "Aglets": (65.78, 11), "Voyager": (1189.06, 1100)},
    "CR": {"Concordia": (312.5, 310), "Aglets": (29.76, 11.05), "Voyager": (38.8, 38.8)},
    "AD": {"Concordia": (25.68, 25.6), "Aglets": (5.9, 5.36), "Voyager": (11.58, 8.31)},
    "MSG-1W": {"Concordia": (77.39, 73.2), "Aglets": (102.94, 102.94),
               "Voyager": (1428.57, 1146.78)},
    "MSG-2W": {"Concordia": (31.35, 20.2), "Aglets": (10.3, 8.13),
               "Voyager": (625, 476.19)},
    "SYNCH": {"Concordia": (16.03, 14), "Aglets": (96.15, 92), "Voyager": (526.32, 413)},
    "MSG-MA": {"Concordia": (12.15, 2), "Aglets": (4.93, 4.9), "Voyager": (9.38, 8.3)},
    "ROAM": {"Concordia": (23.92, 0.68), "Aglets": (44.64, 44.64), "Voyager": (14.7, 14.7)},
    "FORW-MSG": {"Concordia": (math.nan, 12.48), "Aglets": (math.nan, 37.33),
                 "Voyager": (math.nan, 12.91)},
    "FORW-MSG-12": {"Concordia": (50, 9.65), "Aglets": (40.49, 33.75),
                    "Voyager": (48.25, 48.25)},
    "FORW-MA": {"Concordia": (26.31, 19.84), "Aglets": (9.54, 9.54),
                "Voyager": (18.18, 5.76)},
}

#: The unit of each benchmark's rates, as the paper labels them.
UNITS = {
    "CL": "agents/s", "CR": "agents/s", "AD": "agents/s", "MSG-1W": "msg/s",
    "MSG-2W": "2w-msg/s", "SYNCH": "synch/s", "MSG-MA": "round trips/s", "ROAM": "hops/s",
    "PROXY": "requests/s", "FORW-MSG": "msg/s", "FORW-MSG-6": "msg/s",
    "FORW-MSG-12": "msg/s", "FORW-MA": "agents/s",
}

#: TACOMA v1.3's meet, Table 1 of seed 000: the sum of its 13 steps, in microseconds.
TACOMA_MEET_US = 21_675

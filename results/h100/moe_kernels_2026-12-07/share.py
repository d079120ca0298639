#!/usr/bin/env python3
"""Device-time split of the MoE block benchmark's profile (call_1/profile/*.ops.json): the
classification and the share are scripts/moe_block_share's, which this runs.

  python3 share.py call_1/profile/moe_block_flat1_fused1_rank0.ops.json
"""
import os
import runpy

runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                            "scripts", "moe_block_share"), run_name="__main__")

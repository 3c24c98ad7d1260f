# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's `reverb.platform.default` package path.

dm-reverb keeps platform-specific glue here (checkpointer choice, TensorFlow
checks, op library loading, the server binary's flags); reverb_tf's
counterparts live elsewhere and these modules give them dm-reverb's paths.
"""

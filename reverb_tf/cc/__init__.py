"""reverb_tf.cc: the generated protocol buffer modules (dm-reverb's reverb.cc).

`reverb_tf.cc.patterns_pb2` holds the StructuredWriter/PatternDataset config
messages. It is generated at build time (reverb_tf/cc/BUILD) and put here by
scripts/setup.sh in a checkout, or by the wheel.
"""

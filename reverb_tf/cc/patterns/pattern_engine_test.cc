// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/patterns/pattern_engine.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/proto/patterns_cc.pb.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf::patterns {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct NodeSpec {
  int column;
  std::optional<int> start, stop, step;
};

PatternNode MakeNode(const NodeSpec& spec) {
  PatternNode node;
  node.set_flat_source_index(spec.column);
  if (spec.start) node.set_start(*spec.start);
  if (spec.stop) node.set_stop(*spec.stop);
  if (spec.step) node.set_step(*spec.step);
  return node;
}

StructuredWriterConfig MakeConfig(const std::vector<NodeSpec>& nodes,
                                  const std::vector<Condition>& conditions = {},
                                  double priority = 1.0) {
  StructuredWriterConfig config;
  for (const NodeSpec& spec : nodes) *config.add_flat() = MakeNode(spec);
  config.set_table("t");
  config.mutable_priority()->mutable_constant_fn()->set_value(priority);
  for (const Condition& c : conditions) *config.add_conditions() = c;
  return config;
}

Condition StepIndex() {
  Condition c;
  c.set_step_index(true);
  return c;
}
Condition StepsSinceApplied() {
  Condition c;
  c.set_steps_since_applied(true);
  return c;
}
Condition BufferLength() {
  Condition c;
  c.set_buffer_length(true);
  return c;
}
Condition EndEpisode() {
  Condition c;
  c.set_is_end_episode(true);
  c.set_eq(1);
  return c;
}
Condition Data(int column) {
  Condition c;
  c.set_flat_source_index(column);
  return c;
}
Condition Eq(Condition c, int v) {
  c.set_eq(v);
  return c;
}
Condition Ge(Condition c, int v) {
  c.set_ge(v);
  return c;
}
Condition ModEq(Condition c, int mod, int eq) {
  c.mutable_mod_eq()->set_mod(mod);
  c.mutable_mod_eq()->set_eq(eq);
  return c;
}
Condition Not(Condition c) {
  c.set_inverse(true);
  return c;
}

PatternEngine MakeEngine(const std::vector<StructuredWriterConfig>& protos) {
  std::vector<std::string> serialized;
  for (const auto& proto : protos)
    serialized.push_back(proto.SerializeAsString());
  auto configs = ParseConfigs(serialized);
  EXPECT_OK(configs);
  return PatternEngine(*std::move(configs));
}

absl::Status Validate(const StructuredWriterConfig& proto) {
  return ParseConfigs({proto.SerializeAsString()}).status();
}

// Drives an engine with steps whose ids are 0, 1, 2, ... and renders what
// applies as strings: "c<config>:<node>|<node>" with node "[ids]" or "id".
class Driver {
 public:
  explicit Driver(PatternEngine* engine) : engine_(engine) {}

  // Appends `columns` (all other columns missing); scalars for watched ones.
  std::vector<std::string> Step(std::vector<int32_t> columns,
                                std::vector<Scalar> scalars = {},
                                bool partial = false) {
    scalars.resize(columns.size());
    std::vector<Application> out;
    const bool was_open = engine_->step_is_open();
    absl::Status status =
        engine_->Append(next_id_, columns, scalars, partial, &out);
    EXPECT_OK(status);
    if (!partial) ++next_id_;
    if (partial && !was_open) open_ = true;
    if (!partial) open_ = false;
    return Render(out);
  }
  std::vector<std::string> End(bool clear_buffers = true) {
    std::vector<Application> out;
    EXPECT_OK(engine_->EndEpisode(clear_buffers, &out));
    if (open_) ++next_id_;
    open_ = false;
    return Render(out);
  }

  static std::vector<std::string> Render(
      const std::vector<Application>& applications) {
    std::vector<std::string> rendered;
    for (const Application& a : applications) {
      std::string s = absl::StrCat("c", a.config, ":");
      for (size_t n = 0; n < a.nodes.size(); ++n) {
        if (n) s += "|";
        if (a.nodes[n].squeeze) {
          s += absl::StrCat(a.nodes[n].steps[0]);
        } else {
          s += "[" + absl::StrJoin(a.nodes[n].steps, ",") + "]";
        }
      }
      rendered.push_back(s);
    }
    return rendered;
  }

 private:
  PatternEngine* engine_;
  int64_t next_id_ = 0;
  bool open_ = false;
};

TEST(PatternEngineTest, SqueezedAndSlicedNodesNeedTheirHistory) {
  PatternEngine engine =
      MakeEngine({MakeConfig({{0, -3, {}, {}}, {1, {}, -1, {}}})});
  EXPECT_EQ(engine.max_history(), 3);
  Driver d(&engine);
  EXPECT_THAT(d.Step({0, 1}), IsEmpty());
  EXPECT_THAT(d.Step({0, 1}), IsEmpty());
  EXPECT_THAT(d.Step({0, 1}), ElementsAre("c0:[0,1,2]|2"));
  EXPECT_THAT(d.Step({0, 1}), ElementsAre("c0:[1,2,3]|3"));
  EXPECT_THAT(d.End(), IsEmpty());
  EXPECT_THAT(d.Step({0, 1}), IsEmpty());
  EXPECT_THAT(d.Step({0, 1}), IsEmpty());
  EXPECT_THAT(d.Step({0, 1}), ElementsAre("c0:[4,5,6]|6"));
}

TEST(PatternEngineTest, SlicesFollowPythonSemantics) {
  PatternEngine engine =
      MakeEngine({MakeConfig({{0, -3, -1, {}}}), MakeConfig({{0, -5, {}, 2}}),
                  MakeConfig({{0, -4, -1, 2}}), MakeConfig({{0, {}, -2, {}}}),
                  MakeConfig({{0, -2, 0, {}}})});
  Driver d(&engine);
  std::vector<std::vector<std::string>> seen;
  for (int i = 0; i < 5; ++i) seen.push_back(d.Step({0}));
  EXPECT_THAT(seen[0], IsEmpty());
  EXPECT_THAT(seen[1], ElementsAre("c3:0", "c4:[0,1]"));
  EXPECT_THAT(seen[2], ElementsAre("c0:[0,1]", "c3:1", "c4:[1,2]"));
  EXPECT_THAT(seen[3], ElementsAre("c0:[1,2]", "c2:[0,2]", "c3:2", "c4:[2,3]"));
  EXPECT_THAT(seen[4], ElementsAre("c0:[2,3]", "c1:[0,2,4]", "c2:[1,3]", "c3:3",
                                   "c4:[3,4]"));
}

TEST(PatternEngineTest, MissingCellsPreventApplication) {
  PatternEngine engine =
      MakeEngine({MakeConfig({{0, -2, {}, {}}, {1, {}, -1, {}}})});
  Driver d(&engine);
  EXPECT_THAT(d.Step({0, 1}), IsEmpty());
  EXPECT_THAT(d.Step({0}), IsEmpty());  // column 1 missing
  EXPECT_THAT(d.Step({0, 1}), ElementsAre("c0:[1,2]|2"));
  EXPECT_THAT(d.Step({1}), IsEmpty());     // column 0 missing
  EXPECT_THAT(d.Step({0, 1}), IsEmpty());  // step 3 lacks column 0
  EXPECT_THAT(d.Step({0, 1}), ElementsAre("c0:[4,5]|5"));
  EXPECT_THAT(d.Step({0, 1, 7}),
              ElementsAre("c0:[5,6]|6"));  // unknown columns are fine
}

// dm-reverb only looks at a config when the current step has a value for
// a column the config reads (its nodes or data conditions).
TEST(PatternEngineTest, ConfigsNeedAColumnTheyReadInTheCurrentStep) {
  PatternEngine engine =
      MakeEngine({MakeConfig({{0, {}, -2, {}}}),
                  MakeConfig({{0, {}, -2, {}}, {1, {}, -1, {}}}),
                  MakeConfig({{1, {}, -2, {}}}, {}, 1.0),
                  MakeConfig({{0, {}, -2, {}}}, {Eq(Data(1), 1)})});
  Driver d(&engine);
  EXPECT_THAT(d.Step({0, 1}, {Scalar(), Scalar::Integer(0)}), IsEmpty());
  EXPECT_THAT(d.Step({0, 1}, {Scalar(), Scalar::Integer(0)}),
              ElementsAre("c0:0", "c1:0|1", "c2:0"));
  // Column 0 missing now: c0 is not tried although step 1 has it; c1 reads
  // column 1, which is here.
  EXPECT_THAT(d.Step({1}, {Scalar::Integer(0)}), ElementsAre("c1:1|2", "c2:1"));
  // A data condition's column counts; the pattern's column may come later.
  EXPECT_THAT(d.Step({1}, {Scalar::Integer(1)}, true), ElementsAre("c2:2"));
  EXPECT_THAT(d.Step({0}), IsEmpty());  // c3 failed: step 2 has no column 0
}

TEST(PatternEngineTest, EndOfEpisodeNeedsAColumnTheConfigReadsInTheLastStep) {
  PatternEngine engine = MakeEngine(
      {MakeConfig({{0, {}, -2, {}}}, {EndEpisode()}),
       MakeConfig({{0, {}, -2, {}}, {1, {}, -1, {}}}, {EndEpisode()})});
  Driver d(&engine);
  d.Step({0, 1});
  d.Step({0, 1});
  d.Step({1});
  EXPECT_THAT(d.End(), ElementsAre("c1:1|2"));
}

TEST(PatternEngineTest, ColumnBeyondTheStepNeverApplies) {
  PatternEngine engine = MakeEngine({MakeConfig({{5, {}, -1, {}}})});
  Driver d(&engine);
  for (int i = 0; i < 3; ++i) EXPECT_THAT(d.Step({0, 1}), IsEmpty());
}

TEST(PatternEngineTest, PartialStepsApplyAsSoonAsCellsArePresentAndOnlyOnce) {
  PatternEngine engine =
      MakeEngine({MakeConfig({{0, {}, -1, {}}, {1, {}, -1, {}}})});
  Driver d(&engine);
  EXPECT_THAT(d.Step({0}, {}, true), IsEmpty());
  EXPECT_TRUE(engine.step_is_open());
  EXPECT_THAT(d.Step({1}, {}, true), ElementsAre("c0:0|0"));
  EXPECT_THAT(d.Step({}, {}, false), IsEmpty());
  EXPECT_FALSE(engine.step_is_open());
  EXPECT_THAT(d.Step({0}, {}, true), IsEmpty());
  EXPECT_THAT(d.Step({1}), ElementsAre("c0:1|1"));
}

TEST(PatternEngineTest, ColumnTwiceInOneStepFails) {
  PatternEngine engine = MakeEngine({MakeConfig({{0, {}, -1, {}}})});
  std::vector<Application> out;
  std::vector<Scalar> scalars(1);
  ASSERT_OK(engine.Append(0, {0}, scalars, true, &out));
  absl::Status status = engine.Append(0, {0}, scalars, false, &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(engine.step_is_open());
  EXPECT_OK(engine.Append(0, {}, {}, false, &out));
}

TEST(PatternEngineTest, StepIndexConditions) {
  PatternEngine engine =
      MakeEngine({MakeConfig({{0, {}, -1, {}}}, {Eq(StepIndex(), 2)}),
                  MakeConfig({{0, {}, -1, {}}}, {Ge(StepIndex(), 3)}),
                  MakeConfig({{0, {}, -1, {}}}, {Not(Ge(StepIndex(), 1))}),
                  MakeConfig({{0, {}, -1, {}}}, {ModEq(StepIndex(), 3, 1)}),
                  MakeConfig({{0, {}, -1, {}}}, {Not(Eq(StepIndex(), 1))})});
  Driver d(&engine);
  EXPECT_THAT(d.Step({0}), ElementsAre("c2:0", "c4:0"));
  EXPECT_THAT(d.Step({0}), ElementsAre("c3:1"));
  EXPECT_THAT(d.Step({0}), ElementsAre("c0:2", "c4:2"));
  EXPECT_THAT(d.Step({0}), ElementsAre("c1:3", "c4:3"));
  EXPECT_THAT(d.Step({0}), ElementsAre("c1:4", "c3:4", "c4:4"));
  EXPECT_THAT(d.End(/*clear_buffers=*/false), IsEmpty());
  EXPECT_THAT(d.Step({0}), ElementsAre("c2:5", "c4:5"));  // index restarts
}

TEST(PatternEngineTest, StepsSinceAppliedSurvivesEpisodeEnds) {
  PatternEngine engine =
      MakeEngine({MakeConfig({{0, {}, -1, {}}}, {Ge(StepsSinceApplied(), 3)})});
  Driver d(&engine);
  std::vector<std::string> all;
  auto run = [&](int n) {
    for (int i = 0; i < n; ++i) {
      for (const std::string& s : d.Step({0})) all.push_back(s);
    }
  };
  run(4);
  d.End();
  run(2);
  d.End();
  run(5);
  EXPECT_THAT(all, ElementsAre("c0:2", "c0:5", "c0:8"));
}

TEST(PatternEngineTest, StepsSinceAppliedIsOneOnTheFirstStep) {
  PatternEngine engine =
      MakeEngine({MakeConfig({{0, {}, -1, {}}}, {Eq(StepsSinceApplied(), 1)}),
                  MakeConfig({{0, {}, -1, {}}}, {Eq(StepsSinceApplied(), 0)})});
  Driver d(&engine);
  EXPECT_THAT(d.Step({0}), ElementsAre("c0:0"));
  EXPECT_THAT(d.Step({0}), ElementsAre("c0:1"));
}

TEST(PatternEngineTest, BufferLengthIsCappedByTheLongestHistory) {
  PatternEngine engine =
      MakeEngine({MakeConfig({{0, {}, -1, {}}}, {Ge(BufferLength(), 2)}),
                  MakeConfig({{0, -3, {}, {}}}),
                  MakeConfig({{0, {}, -1, {}}}, {Ge(BufferLength(), 4)})});
  Driver d(&engine);
  EXPECT_THAT(d.Step({0}), IsEmpty());
  EXPECT_THAT(d.Step({0}), ElementsAre("c0:1"));
  EXPECT_THAT(d.Step({0}), ElementsAre("c0:2", "c1:[0,1,2]"));
  EXPECT_THAT(d.Step({0}), ElementsAre("c0:3", "c1:[1,2,3]"));
  EXPECT_EQ(engine.buffer_length(), 3);
  d.End();
  EXPECT_EQ(engine.buffer_length(), 0);
  EXPECT_THAT(d.Step({0}), IsEmpty());
}

TEST(PatternEngineTest, DataConditionsReadIntegersOfTheMostRecentStep) {
  PatternEngine engine =
      MakeEngine({MakeConfig({{0, {}, -1, {}}}, {Eq(Data(1), 1)}),
                  MakeConfig({{0, {}, -1, {}}}, {Not(Eq(Data(1), 1))}),
                  MakeConfig({{0, {}, -1, {}}}, {ModEq(Data(1), 3, 2)})});
  EXPECT_THAT(engine.watched(), ElementsAre(false, true));
  Driver d(&engine);
  EXPECT_THAT(d.Step({0, 1}, {Scalar(), Scalar::Integer(1)}),
              ElementsAre("c0:0"));
  EXPECT_THAT(d.Step({0, 1}, {Scalar(), Scalar::Integer(2)}),
              ElementsAre("c1:1", "c2:1"));
  // Missing, float or non-scalar values fail every data condition.
  EXPECT_THAT(d.Step({0}), IsEmpty());
  EXPECT_THAT(d.Step({0, 1}, {Scalar(), Scalar::Float(1.0)}), IsEmpty());
  EXPECT_THAT(d.Step({0, 1}, {Scalar(), Scalar::NonScalar()}), IsEmpty());
  // C++ remainders: -1 % 3 == -1, never 2.
  EXPECT_THAT(d.Step({0, 1}, {Scalar(), Scalar::Integer(-1)}),
              ElementsAre("c1:5"));
}

TEST(PatternEngineTest, DataArrivingLaterInAPartialStep) {
  PatternEngine engine =
      MakeEngine({MakeConfig({{0, {}, -1, {}}}, {Eq(Data(1), 1)})});
  Driver d(&engine);
  EXPECT_THAT(d.Step({0}, {}, true), IsEmpty());
  EXPECT_THAT(d.Step({1}, {Scalar::Integer(1)}), ElementsAre("c0:0"));
}

TEST(PatternEngineTest, EndOfEpisodeConfigs) {
  PatternEngine engine = MakeEngine(
      {MakeConfig({{0, -2, {}, {}}}, {EndEpisode()}),
       MakeConfig({{0, {}, -1, {}}}),
       MakeConfig({{0, {}, -1, {}}}, {EndEpisode(), Eq(StepIndex(), 2)})});
  Driver d(&engine);
  EXPECT_THAT(d.Step({0}), ElementsAre("c1:0"));
  EXPECT_THAT(d.Step({0}), ElementsAre("c1:1"));
  EXPECT_THAT(d.Step({0}), ElementsAre("c1:2"));
  EXPECT_THAT(d.End(), ElementsAre("c0:[1,2]", "c2:2"));
  EXPECT_THAT(d.End(), IsEmpty());  // empty episode
  EXPECT_THAT(d.Step({0}), ElementsAre("c1:3"));
  EXPECT_THAT(d.End(), IsEmpty());  // too short for c0
  EXPECT_THAT(d.Step({0}), ElementsAre("c1:4"));
  EXPECT_THAT(d.Step({0}), ElementsAre("c1:5"));
  EXPECT_THAT(d.End(/*clear_buffers=*/false), ElementsAre("c0:[4,5]"));
  EXPECT_THAT(d.End(/*clear_buffers=*/false),
              IsEmpty());  // nothing appended since
  EXPECT_THAT(d.Step({0}), ElementsAre("c1:6"));
  EXPECT_THAT(d.End(),
              ElementsAre("c0:[5,6]"));  // reaches into the last episode
}

TEST(PatternEngineTest, EndOfEpisodeUsesTheOpenStep) {
  PatternEngine engine =
      MakeEngine({MakeConfig({{0, {}, -1, {}}}, {EndEpisode()})});
  Driver d(&engine);
  d.Step({0});
  d.Step({0}, {}, true);
  EXPECT_THAT(d.End(), ElementsAre("c0:1"));
  EXPECT_FALSE(engine.step_is_open());
  d.Step({0});
  d.Step({1}, {}, true);
  EXPECT_THAT(d.End(), IsEmpty());
}

TEST(PatternEngineTest, EndOfEpisodeDoesNotCountAsAStep) {
  PatternEngine engine = MakeEngine({MakeConfig(
      {{0, {}, -1, {}}}, {EndEpisode(), Ge(StepsSinceApplied(), 2)})});
  Driver d(&engine);
  d.Step({0});
  d.Step({0});
  d.Step({0});
  EXPECT_THAT(d.End(), ElementsAre("c0:2"));
  d.Step({0});
  EXPECT_THAT(d.End(), IsEmpty());
}

TEST(PatternEngineTest, TdErrorPriority) {
  StructuredWriterConfig slice = MakeConfig({{1, -3, {}, {}}});
  slice.mutable_priority()->mutable_td_error()->set_max_priority_weight(0.9);
  slice.mutable_priority()->mutable_td_error()->set_flat_source_index(1);
  StructuredWriterConfig last_node_wins =
      MakeConfig({{1, -3, {}, {}}, {1, {}, -1, {}}});
  last_node_wins.mutable_priority()
      ->mutable_td_error()
      ->set_max_priority_weight(0.9);
  last_node_wins.mutable_priority()->mutable_td_error()->set_flat_source_index(
      1);
  StructuredWriterConfig absent = MakeConfig({{0, {}, -1, {}}});
  absent.mutable_priority()->mutable_td_error()->set_flat_source_index(1);
  PatternEngine engine = MakeEngine({slice, last_node_wins, absent});
  std::vector<Application> out;
  const double values[] = {-1.0, 2.0, -3.0, 0.5};
  for (int i = 0; i < 4; ++i) {
    std::vector<Scalar> scalars = {Scalar(), Scalar::Float(values[i])};
    ASSERT_OK(engine.Append(i, {0, 1}, scalars, false, &out));
  }
  ASSERT_EQ(out.size(), 8);
  EXPECT_EQ(out[0].priority, 0.0);  // absent, step 0
  EXPECT_EQ(out[2].config, 0);
  EXPECT_EQ(out[2].priority, 0.9 * 3.0 + (1 - 0.9) * 2.0);
  EXPECT_EQ(out[3].priority, 3.0);  // the squeezed node decides
  EXPECT_EQ(out[5].priority, 0.9 * 3.0 + (1 - 0.9) * (5.5 / 3));
}

TEST(PatternEngineTest, TdErrorOnNonScalarsAndMissingPriority) {
  StructuredWriterConfig td = MakeConfig({{0, {}, -1, {}}});
  td.mutable_priority()->mutable_td_error()->set_flat_source_index(0);
  StructuredWriterConfig none = MakeConfig({{0, {}, -1, {}}});
  none.clear_priority();
  {
    PatternEngine engine = MakeEngine({td});
    std::vector<Application> out;
    std::vector<Scalar> scalars = {Scalar::NonScalar()};
    absl::Status status = engine.Append(0, {0}, scalars, false, &out);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(),
                HasSubstr("TD Error expects a scalar tensor"));
  }
  {
    PatternEngine engine = MakeEngine({none});
    std::vector<Application> out;
    absl::Status status = engine.Append(0, {0}, {}, false, &out);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("no priority function"));
  }
}

TEST(PatternEngineTest, Validation) {
  auto expect_invalid = [](const StructuredWriterConfig& config,
                           const std::string& what) {
    absl::Status status = Validate(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(status.message(), HasSubstr(what));
    EXPECT_THAT(status.message(),
                HasSubstr("Invalid configuration at position 0"));
  };
  expect_invalid(MakeConfig({}), "`flat` must not be empty");
  StructuredWriterConfig no_table = MakeConfig({{0, {}, -1, {}}});
  no_table.clear_table();
  expect_invalid(no_table, "`table` must not be empty");
  expect_invalid(MakeConfig({{0, {}, 0, {}}}),
                 "flat[0]: `stop` must be < 0 when `start` isn't set");
  expect_invalid(MakeConfig({{0, {}, -1, {}}, {0, {}, 1, {}}}),
                 "flat[1]: `stop` must be <= 0");
  expect_invalid(MakeConfig({{0, {}, {}, {}}}),
                 "At least one of `start` and `stop`");
  expect_invalid(MakeConfig({{0, 0, {}, {}}}), "`start` must be < 0 but got 0");
  expect_invalid(MakeConfig({{0, -2, -2, {}}}),
                 "`stop` (-2) must be > `start` (-2)");
  expect_invalid(MakeConfig({{0, -2, {}, 0}}), "`step` must be > 0 but got 0");
  expect_invalid(MakeConfig({{0, {}, -1, 2}}),
                 "`step` must only be set when `start` is set");
  expect_invalid(MakeConfig({{-1, {}, -1, {}}}),
                 "`flat_source_index` must be >= 0");
  expect_invalid(MakeConfig({{0, {}, -1, {}}}, {Condition()}),
                 "conditions[0]: Conditions must specify a value for `left`");
  expect_invalid(MakeConfig({{0, {}, -1, {}}}, {StepIndex()}),
                 "must specify a value for `cmp`");
  expect_invalid(MakeConfig({{0, {}, -1, {}}}, {ModEq(StepIndex(), 0, 0)}),
                 "`mod_eq.mod` must be > 0");
  expect_invalid(MakeConfig({{0, {}, -1, {}}}, {ModEq(StepIndex(), 2, -1)}),
                 "`mod_eq.eq` must be >= 0");
  Condition end_ge;
  end_ge.set_is_end_episode(true);
  end_ge.set_ge(1);
  expect_invalid(MakeConfig({{0, {}, -1, {}}}, {end_ge}), "`eq=1`");
  expect_invalid(MakeConfig({{0, {}, -1, {}}}, {Not(EndEpisode())}), "`eq=1`");
  expect_invalid(MakeConfig({{0, {}, -1, {}}}, {Eq(Data(-1), 1)}),
                 "must be >= 0");
  // Accepted as dm-reverb accepts them.
  EXPECT_OK(Validate(MakeConfig({{0, -2, 0, {}}})));
  EXPECT_OK(
      Validate(MakeConfig({{0, {}, -1, {}}}, {ModEq(StepIndex(), 2, 2)})));
  EXPECT_OK(Validate(MakeConfig({{5, {}, -1, {}}})));
  StructuredWriterConfig no_priority = MakeConfig({{0, {}, -1, {}}});
  no_priority.clear_priority();
  EXPECT_OK(Validate(no_priority));
  EXPECT_EQ(ParseConfigs({std::string("\xff\xff", 2)}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PatternEngineTest, ValidationNamesThePositionAndTable) {
  StructuredWriterConfig good = MakeConfig({{0, {}, -1, {}}});
  StructuredWriterConfig bad = MakeConfig({{0, 1, {}, {}}});
  bad.set_table("replay");
  absl::Status status =
      ParseConfigs({good.SerializeAsString(), bad.SerializeAsString()})
          .status();
  EXPECT_THAT(
      status.message(),
      HasSubstr(
          "Invalid configuration at position 1 (table 'replay'): flat[0]: "
          "`start` must be < 0 but got 1."));
}

}  // namespace
}  // namespace reverb_tf::patterns

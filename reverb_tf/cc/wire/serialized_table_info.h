// SPDX-License-Identifier: Apache-2.0
// A table's info as the serialized schema::TableInfo (schema.proto), for
// code that sees no protobuf headers: the Python bindings hand the bytes to
// reverb_types.TableInfo.from_serialized_proto, so Python reads the same
// message a remote client gets from ServerInfo, converted in one place.
//
// Thread safety: a pure function.
#ifndef REVERB_TF_CC_WIRE_SERIALIZED_TABLE_INFO_H_
#define REVERB_TF_CC_WIRE_SERIALIZED_TABLE_INFO_H_

#include <string>

#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/table.h"

namespace reverb_tf {

REVERB_TF_EXPORT std::string SerializeTableInfo(const TableInfo& info);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_WIRE_SERIALIZED_TABLE_INFO_H_

/* SPDX-License-Identifier: Apache-2.0 */
#include "unit.h"
#include "params.h"

TEST(placeholder)
{
	CHECK(1);
}


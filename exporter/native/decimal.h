/* Plain decimals read exactly, as float() reads them: shared by the kernels that read numbers (step_fields.c,
 * scan.c's segment records). simple_decimal declines what it cannot read exactly; the caller falls back to
 * float()'s own function. tests/test_native.py compares it with float() bit for bit. */
#ifndef TRAINLOG_DECIMAL_H
#define TRAINLOG_DECIMAL_H

#include <stdint.h>
#include <string.h>

#define DECIMAL_MAX_TEXT 64 /* a longer token is declined */

/* Eight ASCII digits in a little-endian word, and their value (fast_float's SWAR tests). */
static int
eight_digits(uint64_t word)
{
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    (void)word;
    return 0; /* the byte loop reads them */
#endif
    return ((word & UINT64_C(0xF0F0F0F0F0F0F0F0))
            | (((word + UINT64_C(0x0606060606060606)) & UINT64_C(0xF0F0F0F0F0F0F0F0)) >> 4))
           == UINT64_C(0x3333333333333333);
}

/* How many of the word's bytes, from its first, are ASCII digits (0 to 8; little-endian). A byte's carry reaches only
 * the bytes after it, and a byte that carries is no digit. */
static int
leading_digits(uint64_t word)
{
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    (void)word;
    return 0; /* the byte loop reads them */
#endif
    uint64_t classes = (word & UINT64_C(0xF0F0F0F0F0F0F0F0))
                       | (((word + UINT64_C(0x0606060606060606)) & UINT64_C(0xF0F0F0F0F0F0F0F0)) >> 4);
    uint64_t others = classes ^ UINT64_C(0x3333333333333333); /* a byte not 0 for each byte that is no digit */
    return others ? __builtin_ctzll(others) / 8 : 8;
}

static uint64_t
eight_digits_value(uint64_t word)
{
    const uint64_t mask = UINT64_C(0x000000FF000000FF);
    const uint64_t mul1 = UINT64_C(0x000F424000000064); /* 100 + (1000000ULL << 32) */
    const uint64_t mul2 = UINT64_C(0x0000271000000001); /* 1 + (10000ULL << 32) */
    word -= UINT64_C(0x3030303030303030);
    word = (word * 10) + (word >> 8); /* word = (word * 2561) >> 8 */
    return (uint32_t)((((word & mask) * mul1) + (((word >> 16) & mask) * mul2)) >> 32);
}

/* The plain decimal ``[-+]digits[.digits][e[-+]digits]`` with at most 19 significant digits that begins at ``at``:
 * its sign, its digits as an integer and its power of ten; where it stops (the first byte after it, ``end`` at
 * most), NULL when none begins there, it has more digits or it is longer than DECIMAL_MAX_TEXT. */
static const uint8_t *
decimal_prefix(const uint8_t *at, const uint8_t *end, int *negative, uint64_t *mantissa, int *scale)
{
    if (end - at > DECIMAL_MAX_TEXT + 1) end = at + DECIMAL_MAX_TEXT + 1; /* one byte more: a longer token's */
    const uint8_t *start = at;
    *negative = 0;
    if (at < end && (*at == '-' || *at == '+')) *negative = *at++ == '-';
    uint64_t number = 0;
    int digits = 0, significant = 0, power = 0;
    for (; at < end && *at >= '0' && *at <= '9'; at++, digits++) {
        if (number || *at != '0') significant++;
        number = number * 10 + (uint64_t)(*at - '0');
        if (significant > 19) return NULL;
    }
    if (at < end && *at == '.') {
        const uint8_t *fraction = ++at;
        if (number == 0) {
            while (at < end && *at == '0') at++; /* no significant digit yet */
        }
        /* A printed float's fraction: eight digits at a time (a first one not 0 past the zeros above). */
        uint64_t eight;
        while (end - at >= 8 && significant <= 19 - 8 && (memcpy(&eight, at, 8), eight_digits(eight))) {
            number = number * 100000000 + eight_digits_value(eight);
            significant += 8;
            at += 8;
        }
        if (end - at >= 8) { /* the fraction's last digits, fewer than eight, at once: each is significant here */
            memcpy(&eight, at, 8);
            int count = leading_digits(eight);
            if (count > 0 && count < 8) {
                static const uint64_t tens[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};
                significant += count;
                if (significant > 19) return NULL;
                /* The digits moved up to the word's last bytes after '0's: their value by eight_digits_value. */
                uint64_t padded = (eight << (8 * (8 - count))) | (UINT64_C(0x3030303030303030) >> (8 * count));
                number = number * tens[count] + eight_digits_value(padded);
                at += count;
            }
        }
        for (; at < end && *at >= '0' && *at <= '9'; at++) {
            if (number || *at != '0') significant++;
            number = number * 10 + (uint64_t)(*at - '0');
            if (significant > 19) return NULL;
        }
        digits += (int)(at - fraction);
        power -= (int)(at - fraction);
    }
    if (digits == 0) return NULL;
    if (at < end && (*at == 'e' || *at == 'E')) {
        at++;
        int exponent_negative = 0, exponent = 0, exponent_digits = 0;
        if (at < end && (*at == '-' || *at == '+')) exponent_negative = *at++ == '-';
        for (; at < end && *at >= '0' && *at <= '9'; at++, exponent_digits++) {
            if (exponent > 1000) return NULL;
            exponent = exponent * 10 + (*at - '0');
        }
        if (exponent_digits == 0) return NULL;
        power += exponent_negative ? -exponent : exponent;
    }
    if (at - start > DECIMAL_MAX_TEXT) return NULL;
    *mantissa = number;
    *scale = power;
    return at;
}

/* decimal_prefix's parts of a token that is that decimal and nothing else: 0 when it is not. */
static int
decimal_parts(const uint8_t *at, const uint8_t *end, int *negative, uint64_t *mantissa, int *scale)
{
    return decimal_prefix(at, end, negative, mantissa, scale) == end;
}

/* 5**q for q in [-27, 27], its 128 leading bits (rounded up for q < 0), as Eisel-Lemire takes them: the range
 * where that product needs no fallback (Lemire, "Number Parsing at a Gigabyte per Second", 2021; the table and
 * the rounding are fast_float's). */
#define LEMIRE_SMALLEST (-27)
#define LEMIRE_LARGEST 27
static const uint64_t powers_of_five[][2] = {
    {0x9e74d1b791e07e48, 0x775ea264cf55347e}, {0xc612062576589dda, 0x95364afe032a819e},
    {0xf79687aed3eec551, 0x3a83ddbd83f52205}, {0x9abe14cd44753b52, 0xc4926a9672793543},
    {0xc16d9a0095928a27, 0x75b7053c0f178294}, {0xf1c90080baf72cb1, 0x5324c68b12dd6339},
    {0x971da05074da7bee, 0xd3f6fc16ebca5e04}, {0xbce5086492111aea, 0x88f4bb1ca6bcf585},
    {0xec1e4a7db69561a5, 0x2b31e9e3d06c32e6}, {0x9392ee8e921d5d07, 0x3aff322e62439fd0},
    {0xb877aa3236a4b449, 0x09befeb9fad487c3}, {0xe69594bec44de15b, 0x4c2ebe687989a9b4},
    {0x901d7cf73ab0acd9, 0x0f9d37014bf60a11}, {0xb424dc35095cd80f, 0x538484c19ef38c95},
    {0xe12e13424bb40e13, 0x2865a5f206b06fba}, {0x8cbccc096f5088cb, 0xf93f87b7442e45d4},
    {0xafebff0bcb24aafe, 0xf78f69a51539d749}, {0xdbe6fecebdedd5be, 0xb573440e5a884d1c},
    {0x89705f4136b4a597, 0x31680a88f8953031}, {0xabcc77118461cefc, 0xfdc20d2b36ba7c3e},
    {0xd6bf94d5e57a42bc, 0x3d32907604691b4d}, {0x8637bd05af6c69b5, 0xa63f9a49c2c1b110},
    {0xa7c5ac471b478423, 0x0fcf80dc33721d54}, {0xd1b71758e219652b, 0xd3c36113404ea4a9},
    {0x83126e978d4fdf3b, 0x645a1cac083126ea}, {0xa3d70a3d70a3d70a, 0x3d70a3d70a3d70a4},
    {0xcccccccccccccccc, 0xcccccccccccccccd}, {0x8000000000000000, 0x0000000000000000},
    {0xa000000000000000, 0x0000000000000000}, {0xc800000000000000, 0x0000000000000000},
    {0xfa00000000000000, 0x0000000000000000}, {0x9c40000000000000, 0x0000000000000000},
    {0xc350000000000000, 0x0000000000000000}, {0xf424000000000000, 0x0000000000000000},
    {0x9896800000000000, 0x0000000000000000}, {0xbebc200000000000, 0x0000000000000000},
    {0xee6b280000000000, 0x0000000000000000}, {0x9502f90000000000, 0x0000000000000000},
    {0xba43b74000000000, 0x0000000000000000}, {0xe8d4a51000000000, 0x0000000000000000},
    {0x9184e72a00000000, 0x0000000000000000}, {0xb5e620f480000000, 0x0000000000000000},
    {0xe35fa931a0000000, 0x0000000000000000}, {0x8e1bc9bf04000000, 0x0000000000000000},
    {0xb1a2bc2ec5000000, 0x0000000000000000}, {0xde0b6b3a76400000, 0x0000000000000000},
    {0x8ac7230489e80000, 0x0000000000000000}, {0xad78ebc5ac620000, 0x0000000000000000},
    {0xd8d726b7177a8000, 0x0000000000000000}, {0x878678326eac9000, 0x0000000000000000},
    {0xa968163f0a57b400, 0x0000000000000000}, {0xd3c21bcecceda100, 0x0000000000000000},
    {0x84595161401484a0, 0x0000000000000000}, {0xa56fa5b99019a5c8, 0x0000000000000000},
    {0xcecb8f27f4200f3a, 0x0000000000000000},
};

/* ``mantissa`` * 10**``scale`` correctly rounded (Eisel-Lemire): 0 outside its range, below the normal
 * doubles or beyond them (the caller asks strtod). */
static int
eisel_lemire(uint64_t mantissa, int scale, double *value)
{
    if (mantissa == 0 || scale < LEMIRE_SMALLEST || scale > LEMIRE_LARGEST) return 0;
    int zeros = __builtin_clzll(mantissa);
    uint64_t normalized = mantissa << zeros;
    const uint64_t *power = powers_of_five[scale - LEMIRE_SMALLEST];
    unsigned __int128 product = (unsigned __int128)normalized * power[0];
    uint64_t high = (uint64_t)(product >> 64), low = (uint64_t)product;
    const uint64_t below_rounding = UINT64_MAX >> 55; /* the bits under the 52 kept, a rounding bit and one more */
    if ((high & below_rounding) == below_rounding) { /* a carry from the next 64 bits could change them */
        uint64_t next = (uint64_t)(((unsigned __int128)normalized * power[1]) >> 64);
        low += next;
        if (next > low) high++;
    }
    int upper = (int)(high >> 63), shift = upper + 9;
    uint64_t bits = high >> shift;
    int64_t exponent = ((((int64_t)152170 + 65536) * scale) >> 16) + 63 + upper - zeros + 1023;
    if (exponent <= 0) return 0;
    /* Exactly halfway between two doubles (only possible for these powers): round to even. */
    if (low <= 1 && scale >= -4 && scale <= 23 && (bits & 3) == 1 && (bits << shift) == high) bits &= ~UINT64_C(1);
    bits = (bits + (bits & 1)) >> 1;
    if (bits >= UINT64_C(2) << 52) {
        bits = UINT64_C(1) << 52;
        exponent++;
    }
    if (exponent >= 0x7FF) return 0;
    bits = (bits & ~(UINT64_C(1) << 52)) | ((uint64_t)exponent << 52);
    memcpy(value, &bits, sizeof bits);
    return 1;
}

/* The double of ``mantissa`` * 10**``scale`` (negated for ``negative``) read exactly, so the same double float()
 * gives; 0 when it needs strtod. Up to 15 significant digits and a power of ten up to 22: one exact integer, one
 * exact power, one correctly rounded operation (Clinger's fast path); up to 19 digits and powers up to 27:
 * Eisel-Lemire (a printed float's 17). */
static int
decimal_value(int negative, uint64_t mantissa, int scale, double *value)
{
    static const double powers[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    double result;
    if (mantissa < UINT64_C(1000000000000000) && scale >= -22 && scale <= 22) {
        result = scale < 0 ? (double)mantissa / powers[-scale] : (double)mantissa * powers[scale];
    }
    else if (!eisel_lemire(mantissa, scale, &result)) {
        return 0;
    }
    *value = negative ? -result : result;
    return 1;
}

/* A plain decimal read exactly (decimal_value); 0 when it is not one or needs strtod. */
static int
simple_decimal(const uint8_t *at, const uint8_t *end, double *value)
{
    int negative, scale = 0;
    uint64_t mantissa = 0;
    return decimal_parts(at, end, &negative, &mantissa, &scale) && decimal_value(negative, mantissa, scale, value);
}

/* The plain decimal that begins at ``at`` read exactly: where it stops, NULL when none does or it needs strtod (a
 * value's number read as its end is found: the caller tells whether the value ends there). */
static inline const uint8_t *
simple_decimal_prefix(const uint8_t *at, const uint8_t *end, double *value)
{
    int negative, scale = 0;
    uint64_t mantissa = 0;
    const uint8_t *stop = decimal_prefix(at, end, &negative, &mantissa, &scale);
    return stop != NULL && decimal_value(negative, mantissa, scale, value) ? stop : NULL;
}

#endif
